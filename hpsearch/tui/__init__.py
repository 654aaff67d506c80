"""`hpsearch watch`: a live view of one experiment (model: store queries, one snapshot per
refresh; view: rich renderables; loop: the refresh loop, also the view `submit` shows while
it drives; eta: how long the search has run and has left; text: plain pieces `hpsearch
status` prints too). Only reads the store.
"""
