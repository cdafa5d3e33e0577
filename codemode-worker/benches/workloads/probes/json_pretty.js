// JSON.stringify of the 10,000 records with two-space indentation.
JSON.stringify(RECORDS, null, 2).length
