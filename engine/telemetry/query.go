package telemetry

import (
	"encoding/json"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func page[T any](rows []T, offset, limit *int, def int) []T {
	o, n := 0, def
	if offset != nil && *offset > 0 {
		o = *offset
	}
	if limit != nil && *limit >= 0 {
		n = *limit
	}
	if o >= len(rows) {
		return []T{}
	}
	rows = rows[o:]
	if n < len(rows) {
		rows = rows[:n]
	}
	return rows
}

func decodeArgs(payload json.RawMessage, v any, fn string) error {
	if len(payload) == 0 || string(payload) == "null" {
		return nil
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return protocol.NewError(errcode.InvalidArguments, "%s: %v", fn, err)
	}
	return nil
}
