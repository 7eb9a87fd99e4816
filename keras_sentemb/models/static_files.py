"""The files of a static model's folder, named once for its runtime and for the folder inspection."""

STATIC_CONFIG = "sentemb_static.json"
TABLE_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
