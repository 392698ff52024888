"""Pages: self-contained HTML for a run, a comparison, and the index of a work directory."""
