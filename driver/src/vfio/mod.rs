//! The VFIO platform (placeholder).
