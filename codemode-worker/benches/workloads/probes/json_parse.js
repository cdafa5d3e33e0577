// JSON.parse of the 10,000-record tool result (about 1 MB of JSON text).
JSON.parse(RECORDS_JSON).length
