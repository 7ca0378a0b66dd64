//! RESP2/RESP3 request parsing and reply encoding (compute-agent issue).
