package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/configworker"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The engine's own iii-observability entry is used only when the user wrote it: one stored for
// a caller without the owner credential (marked untrusted) gives the defaults and a warning,
// whether it would have stopped the start (an unsupported key) or sent the spans elsewhere;
// the user's own file still configures it, placeholders expanded.
func TestObservabilityConfigTrustsOnlyTheUser(t *testing.T) {
	for _, tc := range []struct {
		file, exporter, warn string
		code                 string
	}{
		{`{"id":"iii-observability","value":{"sampling":{"default":1}},"untrusted":true}`, "memory", "configuration entry not used", ""},
		{`{"id":"iii-observability","value":{"exporter":"otlp","endpoint":"http://collector.example:4318"},"untrusted":true}`, "memory", "configuration entry not used", ""},
		{`{"id":"iii-observability","value":{"exporter":"both","endpoint":"${OTLP_URL}"}}`, "both", "", ""},
		{`{"id":"iii-observability","value":{"sampling":{"default":1}}}`, "", "", errcode.ConfigUnsupported},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "iii-observability.json"), []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		store, err := configworker.New(dir, nil, func(k string) (string, bool) { return "http://127.0.0.1:4318", k == "OTLP_URL" })
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		cfg, err := observabilityConfig(store, "test", slog.New(slog.NewTextHandler(&logs, nil)))
		if tc.code != "" {
			if errcode.As(err, "").Code != tc.code {
				t.Errorf("%s: %v, want %s", tc.file, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if cfg.Exporter != tc.exporter {
			t.Errorf("%s: exporter %q, want %q", tc.file, cfg.Exporter, tc.exporter)
		}
		if tc.exporter == "both" && cfg.Endpoint != "http://127.0.0.1:4318" {
			t.Errorf("%s: endpoint %q", tc.file, cfg.Endpoint)
		}
		if got := logs.String(); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
			t.Errorf("%s: logged %q, want %q", tc.file, got, tc.warn)
		}
	}
}
