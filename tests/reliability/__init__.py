"""Reliability tests: black-box crash, retry, concurrency, bad-input, load and security tests."""
