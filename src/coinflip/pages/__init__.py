"""Pages: self-contained HTML for a run, a comparison, a sweep, and the index of a work directory."""
