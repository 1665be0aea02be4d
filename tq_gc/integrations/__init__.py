"""The lines a trainer adds, one module per stack, each built from that stack's real lifecycle."""
