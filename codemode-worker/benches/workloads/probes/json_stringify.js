// JSON.stringify of the 10,000 records, compact.
JSON.stringify(RECORDS).length
