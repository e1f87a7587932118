"""attngen inside other frameworks: `attngen.integrations.transformers.register()` makes
attn_implementation="attngen" available to Hugging Face Transformers models. Nothing here imports a framework
until it is asked to."""
