"""Activities: everything that touches the outside world (Claude's API, the tools) runs here."""
