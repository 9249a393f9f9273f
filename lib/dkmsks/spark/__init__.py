"""The Spark/Delta adapters: sessions, tables, readers, landing, and the parts of a run on the driver and in tasks."""
