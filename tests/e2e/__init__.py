"""End-to-end tests: real services (Airflow, Spark standalone, compose) started by fixtures."""
