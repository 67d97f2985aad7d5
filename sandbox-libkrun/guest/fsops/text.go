package fsops

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

func compile(pattern string, literal, ignoreCase bool) (*regexp.Regexp, *Error) {
	if literal {
		pattern = regexp.QuoteMeta(pattern)
	}
	if ignoreCase {
		pattern = "(?i)" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, &Error{Code: scode.S217, Message: "invalid regex pattern: " + err.Error()}
	}
	return re, nil
}

// Match is the FsMatch of the contract.
type Match struct {
	Path    string `json:"path"`
	Line    uint64 `json:"line"`
	Content string `json:"content"`
}

func grep(req json.RawMessage) (any, *Error) {
	var r grepReq
	if e := decode(req, &r, need("path", &r.Path), need("pattern", &r.Pattern)); e != nil {
		return nil, e
	}
	recursive := r.Recursive == nil || *r.Recursive
	maxMatches, maxLine := 10000, 4096
	if r.MaxMatches != nil {
		maxMatches = *r.MaxMatches
	}
	if r.MaxLineBytes != nil {
		maxLine = *r.MaxLineBytes
	}
	re, e := compile(r.Pattern, false, r.IgnoreCase)
	if e != nil {
		return nil, e
	}
	files, e := walkFiles(r.Path, recursive, r.IncludeGlob, r.ExcludeGlob)
	if e != nil {
		return nil, e
	}
	matches := []Match{}
	truncated := false
	for _, f := range files {
		if truncated {
			break
		}
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var n uint64
		for sc.Scan() {
			n++
			line := sc.Bytes()
			if n == 1 && bytes.IndexByte(line, 0) >= 0 {
				break // binary file
			}
			if !re.Match(line) {
				continue
			}
			if len(matches) >= maxMatches {
				truncated = true
				break
			}
			matches = append(matches, Match{Path: f, Line: n, Content: clip(line, maxLine)})
		}
		fh.Close()
	}
	return map[string]any{"matches": matches, "truncated": truncated}, nil
}

// clip shortens a line to at most max bytes on a rune boundary, marking the cut with "…".
func clip(line []byte, max int) string {
	if max <= 0 || len(line) <= max {
		return string(line)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return string(line[:cut]) + "…"
}

// SedResult is the FsSedFileResult of the contract.
type SedResult struct {
	Path         string `json:"path"`
	Replacements uint64 `json:"replacements"`
	Success      bool   `json:"success"`
	Error        string `json:"error,omitempty"`
}

func sed(req json.RawMessage) (any, *Error) {
	var r sedReq
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if (len(r.Files) > 0) == (r.Path != "") {
		return nil, invalid("exactly one of `files` and `path` is required")
	}
	if e := required("pattern", r.Pattern); e != nil {
		return nil, e
	}
	if r.Replacement == nil {
		return nil, invalid("missing field `replacement`")
	}
	useRegex := r.Regex == nil || *r.Regex
	re, e := compile(r.Pattern, !useRegex, r.IgnoreCase)
	if e != nil {
		return nil, e
	}
	repl := *r.Replacement
	if !useRegex {
		repl = strings.ReplaceAll(repl, "$", "$$")
	}
	files := r.Files
	if r.Path != "" {
		files, e = walkFiles(r.Path, r.Recursive == nil || *r.Recursive, r.IncludeGlob, r.ExcludeGlob)
		if e != nil {
			return nil, e
		}
	}
	results := []SedResult{}
	var total uint64
	for _, f := range files {
		res := SedResult{Path: f}
		n, err := sedFile(f, re, repl, r.FirstOnly)
		if err != nil {
			res.Error = fsErr(f, err).Message
		} else {
			res.Success, res.Replacements = true, n
			total += n
		}
		results = append(results, res)
	}
	return map[string]any{"results": results, "total_replacements": total}, nil
}

func sedFile(path string, re *regexp.Regexp, repl string, firstOnly bool) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	locs := re.FindAllSubmatchIndex(data, -1)
	if len(locs) == 0 {
		return 0, nil
	}
	if firstOnly {
		locs = locs[:1]
	}
	var out []byte
	last := 0
	for _, loc := range locs {
		out = append(out, data[last:loc[0]]...)
		out = re.Expand(out, []byte(repl), data, loc)
		last = loc[1]
	}
	out = append(out, data[last:]...)
	if err := os.WriteFile(path, out, fi.Mode().Perm()); err != nil {
		return 0, err
	}
	return uint64(len(locs)), nil
}

// grepReq is the request of fs::grep.
type grepReq struct {
	Path         string   `json:"path"`
	Pattern      string   `json:"pattern"`
	Recursive    *bool    `json:"recursive"`
	IgnoreCase   bool     `json:"ignore_case"`
	IncludeGlob  []string `json:"include_glob"`
	ExcludeGlob  []string `json:"exclude_glob"`
	MaxMatches   *int     `json:"max_matches"`
	MaxLineBytes *int     `json:"max_line_bytes"`
}

// sedReq is the request of fs::sed.
type sedReq struct {
	Files       []string `json:"files"`
	Path        string   `json:"path"`
	Recursive   *bool    `json:"recursive"`
	IncludeGlob []string `json:"include_glob"`
	ExcludeGlob []string `json:"exclude_glob"`
	Pattern     string   `json:"pattern"`
	Replacement *string  `json:"replacement"`
	Regex       *bool    `json:"regex"`
	FirstOnly   bool     `json:"first_only"`
	IgnoreCase  bool     `json:"ignore_case"`
}
