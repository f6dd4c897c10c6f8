//! Pooling (avg/max/adaptive, forward and backward).
