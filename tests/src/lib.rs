//! End-to-end test helpers live in `tests/tests/`.
