package interpolate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func env(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestString(t *testing.T) {
	got, missing := String("a=${A} b=${B:dflt} c=${C:} d=$NOT ${A:x} e=${E} f=${1}", env(map[string]string{"A": "1", "E": ""}))
	if d := cmp.Diff("a=1 b=dflt c= d=$NOT 1 e= f=${1}", got); d != "" {
		t.Error(d)
	}
	if len(missing) != 0 {
		t.Errorf("missing %v", missing)
	}
	got, missing = String("${X}-${X}", env(nil))
	if got != "${X}-${X}" || !cmp.Equal(missing, []string{"X", "X"}) {
		t.Errorf("unset without default: %q %v", got, missing)
	}
}

func TestLone(t *testing.T) {
	for s, want := range map[string]bool{"${A}": true, "${A:1}": true, " ${A}": false, "${A}${B}": false, "x": false} {
		if Lone(s) != want {
			t.Errorf("Lone(%q) = %v", s, !want)
		}
	}
}

// decode expands text and decodes it into a map, the way a consumer reads it.
func decode(t *testing.T, text string, vars map[string]string) map[string]any {
	t.Helper()
	doc, missing, err := YAML([]byte(text), env(vars))
	if err != nil || len(missing) > 0 {
		t.Fatalf("%q: %v %v", text, err, missing)
	}
	var out map[string]any
	if err := doc.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestValuesKeepTheDocumentsShape: a value holding ": ", a newline, "#", "]" or a quote stays
// the one scalar it stands in, in block and flow context alike.
func TestValuesKeepTheDocumentsShape(t *testing.T) {
	for _, v := range []string{"x: y", "x\n  other: y", "a # not a comment", "[1, 2]", "}, b: {", `it's "q"`, "- item", "&a *b"} {
		vars := map[string]string{"V": v}
		for _, text := range []string{"k: ${V}\nn: 1\n", "{k: ${V}, n: 1}", "k: '${V}'\nn: 1\n", "k: \"${V}\"\nn: 1\n", "k: |\n  ${V}\nn: 1\n"} {
			got := decode(t, text, vars)
			want := map[string]any{"k": v, "n": 1}
			if strings.Contains(text, "|") {
				want["k"] = v + "\n"
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%q with V=%q:\n%s", text, v, d)
			}
		}
	}
}

// TestFlowMappings: iii's config fixtures write placeholders inside flow mappings; a plain one
// takes the type of its text, a quoted one stays a string.
func TestFlowMappings(t *testing.T) {
	got := decode(t, "workers:\n  - {name: a, config: {port: ${PORT:3111}, host: ${HOST:127.0.0.1}, on: ${ON:true}, s: \"${PORT:1}\", url: http://${HOST:h}:${PORT:1}/x, list: [${PORT:1}, ${N:~}]}}\n",
		map[string]string{"PORT": "4000"})
	want := map[string]any{"workers": []any{map[string]any{"name": "a", "config": map[string]any{
		"port": 4000, "host": "127.0.0.1", "on": true, "s": "4000", "url": "http://h:4000/x", "list": []any{4000, nil}}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
}

func TestKeysDefaultsAndComments(t *testing.T) {
	got := decode(t, "${K:key}: ${A}${B}\n# ${IN_A_COMMENT}\nempty: ${E:}\nset_empty: ${S:d}\n", map[string]string{"A": "1", "B": "2", "S": ""})
	if d := cmp.Diff(map[string]any{"key": 12, "empty": nil, "set_empty": nil}, got); d != "" {
		t.Error(d)
	}
}

func TestMissingNamesTheLine(t *testing.T) {
	doc, missing, err := YAML([]byte("a: 1\nb: {c: ${NOPE}}\nd: |\n  x\n  ${ALSO} ${NOPE:ok}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Missing{{"NOPE", 2}, {"ALSO", 5}}, missing); d != "" {
		t.Error(d)
	}
	if c := doc.Content[0].Content[3].Content[1]; c.Value != "${NOPE}" {
		t.Errorf("an unset variable keeps its placeholder: %q", c.Value)
	}
}

// TestWordsLikeTheMaskStayAsWritten: a text that already holds the mask's word is not confused
// with a placeholder.
func TestWordsLikeTheMaskStayAsWritten(t *testing.T) {
	got := decode(t, "a: iiienv0_\nb: ${B:2}\n", nil)
	if d := cmp.Diff(map[string]any{"a": "iiienv0_", "b": 2}, got); d != "" {
		t.Error(d)
	}
}

func TestYAMLErrorsKeepTheFilesLines(t *testing.T) {
	_, _, err := YAML([]byte("a: ${A:1}\n\nb: ${B}: x\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("err = %v", err)
	}
}

func TestDecode(t *testing.T) {
	type cfg struct {
		Port  int    `yaml:"port"`
		Host  string `yaml:"host"`
		Inner struct {
			N int `yaml:"n"`
		} `yaml:"inner"`
	}
	c := cfg{Port: 1, Host: "h"}
	if m, err := Decode([]byte("port: ${P}\ninner: {n: ${N:7}}\n"), env(map[string]string{"P": "4000"}), &c); err != nil || m != nil {
		t.Fatal(m, err)
	}
	if c.Port != 4000 || c.Host != "h" || c.Inner.N != 7 {
		t.Errorf("%+v", c)
	}
	_, err := Decode([]byte("port: ${P:1}\n\n# c\ninner: {n: 1, x: ${X:2}}\nprot: 3\n"), env(nil), &c)
	if err == nil || !strings.Contains(err.Error(), "line 4: field x not found") || !strings.Contains(err.Error(), "line 5: field prot not found") {
		t.Errorf("unknown keys: %v", err)
	}
	if _, err := Decode([]byte("port: ${P:x}\n"), env(nil), &c); err == nil || !strings.Contains(err.Error(), "cannot unmarshal") {
		t.Errorf("a value of the wrong type: %v", err)
	}
	if m, err := Decode([]byte("port: ${P}\n"), env(nil), &c); err != nil || len(m) != 1 || m[0].Name != "P" {
		t.Errorf("missing: %v %v", m, err)
	}
	before := c
	if _, err := Decode([]byte("# nothing\n"), env(nil), &c); err != nil || c != before {
		t.Errorf("an empty document: %v %+v", err, c)
	}
}
