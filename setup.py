"""Packaging for lit-unlearn.

`callbacks/` and `configs/` live at the top level of the repository (the design card's layout) but are
installed under the package namespace, as `lit_unlearn.callbacks` and `lit_unlearn.configs`, so no generic
top-level `callbacks` module lands in site-packages.
"""

from setuptools import setup

PACKAGES = [
    "lit_unlearn",
    "lit_unlearn.core",
    "lit_unlearn.storage",
    "lit_unlearn.reporting",
    "lit_unlearn.algorithms",
    "lit_unlearn.audit",
    "lit_unlearn.distill",
    "lit_unlearn.bench",
    "lit_unlearn.commands",
    "lit_unlearn.data",
    "lit_unlearn.distributed",
    "lit_unlearn.experiments",
    "lit_unlearn.launch",
    "lit_unlearn.metrics",
    "lit_unlearn.metrics.tofu",
    "lit_unlearn.metrics.muse",
    "lit_unlearn.models",
    "lit_unlearn.modules",
    "lit_unlearn.verification",
    "lit_unlearn.worlds",
    "lit_unlearn.callbacks",
    "lit_unlearn.configs",
]

# Causal LMs, TOFU data and metrics, sharded training. transformers is pinned: the next release needs a
# dependency that not every registry serves; deepspeed is pinned because its ZeRO internals are used.
LLM = [
    "transformers==5.24.0",
    "tokenizers>=0.20",
    "datasets>=3.0",
    "rouge-score>=0.1.2",
    "peft>=0.13",
    "deepspeed==0.19.8",
    "pandas>=2.0",
    "pyarrow>=15",
]

setup(
    name="lit-unlearn",
    version="0.1.0",
    description="Machine unlearning (HAMU, OFMU and baselines) as PyTorch Lightning trainers",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir={
        "lit_unlearn": "lit_unlearn",
        "lit_unlearn.callbacks": "callbacks",
        "lit_unlearn.configs": "configs",
    },
    package_data={"lit_unlearn.configs": ["*.yaml", "*/*.yaml", "*/*/*.yaml"], "lit_unlearn.data": ["tofu_release/*"],
                  "lit_unlearn.verification": ["*.json"],
                  "lit_unlearn.worlds": ["prebuilt/*/*.json", "prebuilt/*/*/*"]},
    include_package_data=True,
    # torch is pinned by the install instructions (a CPU wheel is installed first); a range here keeps pip
    # from replacing it.
    install_requires=[
        "torch>=2.4",
        "lightning==2.6.6",
        "torchmetrics>=1.4",
        "lightning-utilities>=0.11",
        "tensorboard>=2.15",
        "jsonargparse[signatures]>=4.32",
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "PyYAML>=6",
    ],
    extras_require={
        "llm": LLM,
        "plots": ["matplotlib>=3.7"],
        # the suite covers the LLM and DeepSpeed paths too; two workers share the 2-core machines' time
        "test": ["pytest>=8", "pytest-xdist>=3.5", "matplotlib>=3.7", *LLM],
    },
    entry_points={"console_scripts": ["lit-unlearn=lit_unlearn.cli:main"]},
)
