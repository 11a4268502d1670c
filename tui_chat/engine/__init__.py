"""The engine side: no Textual, no Rich. Token bytes in, decoded stop-checked text out."""
