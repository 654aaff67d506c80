"""`hpsearch watch`: a live view of one experiment (model: store queries; view: rich
renderables; loop: the refresh loop)."""
