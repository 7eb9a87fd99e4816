"""Data and helpers that several test modules share.

A test module never imports another test module: what two of them need lives
here (or, for fixtures, in a conftest), and each test module imports it.
"""
