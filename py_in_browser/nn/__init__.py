"""Neural-network building blocks: activations, initializers, layers, losses and metrics."""
