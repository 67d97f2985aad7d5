package condition

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

func TestAnswers(t *testing.T) {
	for answer, want := range map[string]bool{"false": false, " false\n": false, "true": true, "null": true, `{"ok":false}`: true, `"false"`: true} {
		if got := Allows(json.RawMessage(answer)); got != want {
			t.Errorf("Allows(%s) = %v, want %v", answer, got, want)
		}
	}
}

func TestAsk(t *testing.T) {
	var seen []string
	call := func(ctx context.Context, fn, ns string, payload any) (json.RawMessage, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the condition call has no deadline")
		}
		seen = append(seen, fn+"@"+ns)
		if fn == "broken" {
			return nil, errors.New("crashed")
		}
		return json.RawMessage(`false`), nil
	}
	if ok, err := Ask(context.Background(), call, "no", "shop", 1); ok || err != nil {
		t.Errorf("false answer: %v, %v", ok, err)
	}
	if ok, err := Ask(context.Background(), call, "broken", "", 1); ok || err == nil {
		t.Errorf("failed call: %v, %v", ok, err)
	}
	if len(seen) != 2 || seen[0] != "no@shop" {
		t.Errorf("calls: %v", seen)
	}
}
