"""The runtime: operations on agents and homes (and, later, the turn loop, tools and providers)."""
