"""Programs recipegen ships into the engine's containers (standard library only, read as text by the compiler, never
imported by it): the group watch."""
