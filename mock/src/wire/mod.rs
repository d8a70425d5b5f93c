//! Wire formats (placeholder).
