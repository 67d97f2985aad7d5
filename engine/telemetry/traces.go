package telemetry

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func durationMS(s *Span) float64 {
	if s.EndTimeUnixNano < s.StartTimeUnixNano {
		return 0
	}
	return float64(s.EndTimeUnixNano-s.StartTimeUnixNano) / 1e6
}

// internal reports whether s is an engine span of an engine::* function.
func internal(s *Span) bool { return strings.HasPrefix(s.Attr("iii.function.id"), "engine::") }

// tracesQuery is the payload of engine::traces::list.
type tracesQuery struct {
	TraceID         *string    `json:"trace_id"`
	TraceIDs        []string   `json:"trace_ids"`
	Offset          *int       `json:"offset"`
	Limit           *int       `json:"limit"`
	ServiceName     *string    `json:"service_name"`
	Name            *string    `json:"name"`
	Status          *string    `json:"status"`
	MinDurationMS   *float64   `json:"min_duration_ms"`
	MaxDurationMS   *float64   `json:"max_duration_ms"`
	StartTime       *uint64    `json:"start_time"`
	EndTime         *uint64    `json:"end_time"`
	SortBy          string     `json:"sort_by"`
	SortOrder       string     `json:"sort_order"`
	Attributes      [][]string `json:"attributes"`
	IncludeInternal bool       `json:"include_internal"`
	SearchAllSpans  bool       `json:"search_all_spans"`
}

func (w *Worker) tracesList(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in tracesQuery
	if err := decodeArgs(payload, &in, FnTracesList); err != nil {
		return nil, err
	}
	for _, a := range in.Attributes {
		if len(a) != 2 {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s: attributes must be [key, value] pairs", FnTracesList)
		}
	}
	byTrace := map[string][]*Span{}
	all := w.spans.snapshot(time.Now())
	for i := range all {
		byTrace[all[i].TraceID] = append(byTrace[all[i].TraceID], &all[i])
	}
	rows := []Span{}
	for id, spans := range byTrace {
		if root, ok := in.match(id, spans); ok {
			rows = append(rows, *root)
		}
	}
	sortTraces(rows, in.SortBy, in.SortOrder)
	total := len(rows)
	offset, limit := 0, 100
	if in.Offset != nil && *in.Offset > 0 {
		offset = *in.Offset
	}
	if in.Limit != nil && *in.Limit >= 0 {
		limit = *in.Limit
	}
	return map[string]any{"spans": page(rows, &offset, &limit, limit), "total": total, "offset": offset, "limit": limit}, nil
}

// match returns the root span of the trace id, of which spans are the spans, and whether the
// trace passes every filter of q.
func (q *tracesQuery) match(id string, spans []*Span) (*Span, bool) {
	contains := func(have, want string) bool { return strings.Contains(strings.ToLower(have), strings.ToLower(want)) }
	if q.TraceID != nil && id != *q.TraceID || q.TraceID == nil && len(q.TraceIDs) > 0 && !containsStr(q.TraceIDs, id) {
		return nil, false
	}
	root := rootOf(spans)
	if !q.IncludeInternal && internal(root) {
		return nil, false
	}
	if q.Name != nil {
		match := contains(root.Name, *q.Name)
		if !match && q.SearchAllSpans {
			for _, s := range spans {
				match = match || contains(s.Name, *q.Name)
			}
		}
		if !match {
			return nil, false
		}
	}
	d := durationMS(root)
	startMS, endMS := root.StartTimeUnixNano/1e6, root.EndTimeUnixNano/1e6
	if q.ServiceName != nil && !contains(root.ServiceName, *q.ServiceName) || q.Status != nil && !contains(root.Status, *q.Status) ||
		q.MinDurationMS != nil && d < *q.MinDurationMS || q.MaxDurationMS != nil && d > *q.MaxDurationMS ||
		q.StartTime != nil && endMS < *q.StartTime || q.EndTime != nil && startMS > *q.EndTime {
		return nil, false
	}
	ok := true
	for _, a := range q.Attributes {
		ok = ok && root.Attr(a[0]) == a[1]
	}
	return root, ok
}

// sortTraces sorts the root spans rows, stably, by sortBy (start time unless duration,
// service_name or name), descending when order is desc.
func sortTraces(rows []Span, sortBy, order string) {
	less := func(a, b *Span) bool { return a.StartTimeUnixNano < b.StartTimeUnixNano }
	switch sortBy {
	case "duration", "duration_ms":
		less = func(a, b *Span) bool { return durationMS(a) < durationMS(b) }
	case "service_name":
		less = func(a, b *Span) bool { return a.ServiceName < b.ServiceName }
	case "name":
		less = func(a, b *Span) bool { return a.Name < b.Name }
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if order == "desc" {
			return less(&rows[j], &rows[i])
		}
		return less(&rows[i], &rows[j])
	})
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rootOf is a trace's root: the earliest span whose parent is not stored.
func rootOf(spans []*Span) *Span {
	ids := make(map[string]bool, len(spans))
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var root *Span
	for _, s := range spans {
		top := s.ParentSpanID == nil || !ids[*s.ParentSpanID]
		if top && (root == nil || s.StartTimeUnixNano < root.StartTimeUnixNano) {
			root = s
		}
	}
	if root == nil {
		root = spans[0]
	}
	return root
}

// treeNode is a span with its children, as iii's SpanTreeNode (the span's fields flattened).
type treeNode struct {
	Span
	Children []*treeNode `json:"children"`
}

func (w *Worker) tracesTree(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		TraceID string `json:"trace_id"`
	}
	if err := decodeArgs(payload, &in, FnTracesTree); err != nil {
		return nil, err
	}
	if in.TraceID == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {trace_id}: missing field `trace_id`", FnTracesTree)
	}
	nodes := map[string]*treeNode{}
	var order []*treeNode
	for _, s := range w.spans.snapshot(time.Now()) {
		if s.TraceID == in.TraceID {
			n := &treeNode{Span: s, Children: []*treeNode{}}
			nodes[s.SpanID] = n
			order = append(order, n)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].StartTimeUnixNano < order[j].StartTimeUnixNano })
	roots := []*treeNode{}
	for _, n := range order {
		if n.ParentSpanID != nil && nodes[*n.ParentSpanID] != nil && nodes[*n.ParentSpanID] != n {
			p := nodes[*n.ParentSpanID]
			p.Children = append(p.Children, n)
			continue
		}
		roots = append(roots, n)
	}
	return map[string]any{"roots": roots}, nil
}
