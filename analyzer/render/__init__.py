"""Output formats, one module each: console (rich), json."""
