package httpworker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Middleware is one global middleware of the worker's configuration (key middleware), as iii's
// http worker configures it: the function to call, its phase (only "preHandler", the default)
// and its priority (lower runs first; equal priorities keep their order in the list).
type Middleware struct {
	FunctionID string `yaml:"function_id" json:"function_id"`
	Phase      string `yaml:"phase" json:"phase"`
	Priority   int    `yaml:"priority" json:"priority"`
}

// phasePreHandler is the one middleware phase: after routing, before the route's function.
const phasePreHandler = "preHandler"

func validateMiddleware(mws []Middleware) error {
	for i, m := range mws {
		if m.FunctionID == "" {
			return fmt.Errorf("middleware[%d].function_id must name a function", i)
		}
		if m.Phase != "" && m.Phase != phasePreHandler {
			return fmt.Errorf("middleware[%d].phase %q is not supported (the only phase is %s)", i, m.Phase, phasePreHandler)
		}
	}
	return nil
}

// globalChain is the function ids of mws in the order they run: by priority, ties in list order.
func globalChain(mws []Middleware) []string {
	sorted := append([]Middleware(nil), mws...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Priority < sorted[j].Priority })
	ids := make([]string, len(sorted))
	for i, m := range sorted {
		ids[i] = m.FunctionID
	}
	return ids
}

// middlewareResult is what a middleware function answers: {action: "continue", context?} or
// {action: "respond", response: {status_code, headers, body}}.
type middlewareResult struct {
	Action   string          `json:"action"`
	Context  json.RawMessage `json:"context"`
	Response json.RawMessage `json:"response"`
}

// runMiddleware calls middleware fn with {phase, request, context} (request: the handler's
// request without body, context and trigger) and applies its answer: on "continue" its context
// object is merged (shallowly) into ctx and true is returned; on "respond" its response is
// written and false returned. A failure, a timeout or any other answer is written as an error
// envelope (500, 504, 500 INTERNAL_ERROR) and false returned, so the route's function never runs.
func (s *Server) runMiddleware(w http.ResponseWriter, r *http.Request, rt *route, fn string, req, ctx map[string]any, timeout time.Duration) bool {
	in := map[string]any{"phase": phasePreHandler, "context": ctx, "request": map[string]any{
		"method": req["method"], "path": req["path"], "path_params": req["path_params"],
		"query_params": req["query_params"], "headers": req["headers"]}}
	out, err := s.call(r.Context(), rt.t, fn, in, timeout)
	if err != nil {
		s.failCall(w, r, "middleware", fn, err)
		return false
	}
	var res middlewareResult
	if json.Unmarshal(out, &res) != nil {
		res = middlewareResult{}
	}
	switch res.Action {
	case "continue":
		if len(res.Context) == 0 || string(res.Context) == "null" {
			return true
		}
		var add map[string]any
		if json.Unmarshal(res.Context, &add) != nil {
			s.answerError(w, r, http.StatusInternalServerError, CodeInternalError,
				fmt.Sprintf("middleware %s answered a context that is not an object: %s", fn, res.Context), "function_id", fn)
			return false
		}
		for k, v := range add {
			ctx[k] = v
		}
		return true
	case "respond":
		s.respond(w, res.Response)
		return false
	}
	s.answerError(w, r, http.StatusInternalServerError, CodeInternalError,
		fmt.Sprintf(`middleware %s answered %s; a middleware answers {"action": "continue"} or {"action": "respond", "response": {...}}`, fn, clip(out)),
		"function_id", fn)
	return false
}

// clip is at most 200 bytes of a function's answer, for an error message.
func clip(b json.RawMessage) string {
	if len(b) == 0 {
		return "nothing"
	}
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
