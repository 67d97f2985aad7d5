package triggerkeys

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
)

// TestCheck: implemented keys and description pass; another key is refused by name.
func TestCheck(t *testing.T) {
	if err := Check("cron", json.RawMessage(`{"expression":"* * * * * *","description":"every second"}`), "expression"); err != nil {
		t.Fatalf("description refused: %v", err)
	}
	err := Check("cron", json.RawMessage(`{"expression":"x","timezone":"UTC","a_b":1}`), "expression")
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != Code || !strings.Contains(pe.Message, `"a_b"`) {
		t.Fatalf("unknown key: %v", err)
	}
	if err := Check("cron", json.RawMessage(`"not an object"`), "expression"); err != nil {
		t.Fatalf("not an object: %v", err)
	}
}
