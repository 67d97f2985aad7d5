package composefile

import (
	_ "embed"
	"encoding/json"
)

// schemaJSON is the JSON Schema of worker-compose.yaml. The parser is what validates a file;
// schema_test.go proves the two agree on every compose file of the tests and fixtures, and
// the schema's $comment lists the checks only the parser makes.
//
//go:embed schema.json
var schemaJSON []byte

// Example is a worker-compose.yaml that uses every kind of key (compose::schema returns it).
//
//go:embed example.yaml
var Example string

// Schema returns the JSON Schema of worker-compose.yaml (draft 2020-12).
func Schema() json.RawMessage { return append(json.RawMessage(nil), schemaJSON...) }
