"""One rank of a test's multi-process check: `python tests/spawn_worker.py TEST_FILE FUNCTION RANK ARGS_JSON` calls
FUNCTION(RANK, *ARGS) from TEST_FILE, as torch.multiprocessing.spawn would, in a process the prefork server
starts (tests/prefork.py: `spawn` in conftest.py)."""

import importlib.util
import json
import sys

path, function, rank, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
spec = importlib.util.spec_from_file_location("spawned_test_module", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
getattr(module, function)(rank, *args)
