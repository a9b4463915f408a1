"""An installed app of a project that adds Helix, for the discovery of `agents` modules."""
