"""ECP5 synthesis and place-and-route flows."""
