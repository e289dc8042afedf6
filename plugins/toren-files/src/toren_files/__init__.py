"""toren-files: the ``read_document`` tool over the files uploaded to Toren."""
