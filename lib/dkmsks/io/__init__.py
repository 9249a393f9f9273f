"""File formats: the readers and writers of docs/design.md §6, with row-level validation (:mod:`.formats`)."""
