"""Amazon SQS as Toren's queue driver (``TOREN_QUEUE=sqs``). See the package README."""
