"""The launch path: every training run as a RunSpec (lit_unlearn.launch.runs), its Trainer made in one place
(trainer_builder), presets and `# extends:` (presets), the command line's LightningCLI (lightning_cli), run
folders and SLURM (run_folder, cluster). Modules are imported where used: nothing heavy here."""
