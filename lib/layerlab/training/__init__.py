"""Training: the trainer, the book's shared model family, growth schedules and the small ViTs."""
