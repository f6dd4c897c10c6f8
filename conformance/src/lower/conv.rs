//! Convolution on TensorE (see the module docs once lowered).
