"""The only code that touches the project's files: schemas, parquet with provenance, typed readers, atomic writes."""
