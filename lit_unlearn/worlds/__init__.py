"""Offline worlds to unlearn in: the TOFU world built from the real release (tofu_world), the generated stand-ins
(generated_tofu, muse), and the tiny Llamas they train (tiny_llama). Modules are imported where used."""
