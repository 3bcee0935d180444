package main

// The gateway's scenario: the calls a Go gateway makes on its hot path, each through the validating
// client (contract.go), with the behaviour a gateway relies on checked on top of the contract.

import (
	"context"
	"fmt"
	"time"
)

type gateway struct {
	c   *Contract
	run string // makes names and keys unique per run: a second run against the same service starts fresh
	// The latest answer and its call, for behaviour violations.
	last     *Result
	lastCall string
	// The account the scenario creates, and its access token.
	accountID   float64
	accessToken string
}

// last is the answer of the latest call: a behaviour violation names its operation.
func (g *gateway) do(ctx context.Context, call Call) (map[string]interface{}, error) {
	r, err := g.c.Do(ctx, call)
	if err != nil {
		return nil, err
	}
	g.last, g.lastCall = r, call.Method+" "+call.Path
	return r.JSON(), nil
}

// behaviour: the answer was valid per the document, but not what a gateway relies on.
func (g *gateway) behaviour(format string, args ...interface{}) error {
	return &Violation{g.last.Operation, g.lastCall, "behaviour", fmt.Sprintf(format, args...)}
}

// until repeats check (whose calls are each validated) until it reports done, or the context ends.
func until(ctx context.Context, what string, check func() (bool, error)) error {
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (g *gateway) play(ctx context.Context) error {
	steps := []func(context.Context) error{g.probes, g.accountAndToken, g.usage, g.snapshot, g.changes, g.quota, g.idempotency, g.manualRun, g.errorCases}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func num(v interface{}) float64 {
	f, _ := v.(float64)
	return f
}

// probes: the document's own answer and the readiness probe a gateway's load balancer uses, both without a token.
func (g *gateway) probes(ctx context.Context) error {
	for _, path := range []string{"/api/v1/openapi.json", "/readyz"} {
		if _, err := g.do(ctx, Call{Method: "GET", Path: path, NoAuth: true, Want: 200}); err != nil {
			return err
		}
	}
	return nil
}

// accountAndToken: the gateway registers an upstream account, then asks for its access token (the hot path).
func (g *gateway) accountAndToken(ctx context.Context) error {
	g.accessToken = "contract-go-access-" + g.run
	acc, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/accounts", Want: 201, Body: map[string]interface{}{
		"platform": "openai",
		"name":     "contract-go-" + g.run,
		"credentials": map[string]interface{}{
			"access_token":  g.accessToken,
			"refresh_token": "contract-go-refresh-" + g.run,
			"expires_at":    time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339),
		},
	}})
	if err != nil {
		return err
	}
	g.accountID = num(acc["id"])
	if g.accountID <= 0 {
		return g.behaviour("no account id in %v", acc)
	}
	path := fmt.Sprintf("/api/v1/accounts/%d/token", int64(g.accountID))
	tok, err := g.do(ctx, Call{Method: "POST", Path: path, Want: 200})
	if err != nil {
		return err
	}
	if tok["access_token"] != g.accessToken {
		return g.behaviour("the token is not the account's access token")
	}
	return nil
}

// usage: a batch keyed by request ids, sent twice: the second time nothing is stored again.
func (g *gateway) usage(ctx context.Context) error {
	events := []map[string]interface{}{}
	for i := 0; i < 3; i++ {
		events = append(events, map[string]interface{}{
			"request_id": fmt.Sprintf("%s-req-%d", g.run, i), "user_id": "user-" + g.run, "account_id": int64(g.accountID),
			"platform": "openai", "model": "gpt-4o", "input_tokens": 100 + i, "output_tokens": 20, "cost": "0.0012",
		})
	}
	for attempt, want := range []struct{ stored, duplicates float64 }{{3, 0}, {0, 3}} {
		r, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/usage", Want: 200, Body: map[string]interface{}{"events": events}})
		if err != nil {
			return err
		}
		if num(r["stored"]) != want.stored || num(r["duplicates"]) != want.duplicates {
			return g.behaviour("send %d of the same batch: expected stored %v and duplicates %v, got %v", attempt+1, want.stored, want.duplicates, r)
		}
	}
	return nil
}

// snapshot: the routing cache lists the new account (it may take a round of the snapshot to show it).
func (g *gateway) snapshot(ctx context.Context) error {
	return until(ctx, "the new account in the scheduler snapshot", func() (bool, error) {
		r, err := g.do(ctx, Call{Method: "GET", Path: "/api/v1/scheduler/accounts?platform=openai", Want: 200})
		if err != nil {
			return false, err
		}
		list, _ := r["accounts"].([]interface{})
		for _, a := range list {
			if m, ok := a.(map[string]interface{}); ok && num(m["id"]) == g.accountID {
				return true, nil
			}
		}
		return false, nil
	})
}

// changes: the change stream without Redis, paged from the start until the account's creation shows.
func (g *gateway) changes(ctx context.Context) error {
	var after int64
	id := fmt.Sprintf("%d", int64(g.accountID))
	return until(ctx, "account.created of the new account in the change stream", func() (bool, error) {
		r, err := g.do(ctx, Call{Method: "GET", Path: fmt.Sprintf("/api/v1/changes?after=%d&limit=500", after), Want: 200})
		if err != nil {
			return false, err
		}
		events, _ := r["events"].([]interface{})
		for _, e := range events {
			if m, ok := e.(map[string]interface{}); ok && m["type"] == "account.created" && m["id"] == id {
				return true, nil
			}
		}
		if next, ok := r["next"].(float64); ok && int64(next) > after {
			after = int64(next)
		}
		return false, nil
	})
}

// quota: two increments in one call, then the user's counters (the flusher writes them to PostgreSQL).
func (g *gateway) quota(ctx context.Context) error {
	user := "user-" + g.run
	r, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/quota/usage", Want: 200, Body: map[string]interface{}{
		"increments": []map[string]interface{}{{"user_id": user, "platform": "openai", "amount": 100}, {"user_id": user, "platform": "openai", "amount": 50}},
	}})
	if err != nil {
		return err
	}
	results, _ := r["results"].([]interface{})
	var second map[string]interface{}
	if len(results) == 2 {
		second, _ = results[1].(map[string]interface{})
	}
	if num(second["used"]) != 150 {
		return g.behaviour("expected the second increment to leave 150 used, got %v", r)
	}
	return until(ctx, "the quota counter of "+user, func() (bool, error) {
		q, err := g.do(ctx, Call{Method: "GET", Path: "/api/v1/quota/" + user, Want: 200})
		if err != nil {
			return false, err
		}
		platforms, _ := q["platforms"].([]interface{})
		for _, p := range platforms {
			if m, ok := p.(map[string]interface{}); ok && m["platform"] == "openai" && num(m["used"]) == 150 {
				return true, nil
			}
		}
		return false, nil
	})
}

// idempotency: a keyed operation begun, completed, then begun again: the stored answer is replayed.
func (g *gateway) idempotency(ctx context.Context) error {
	key := map[string]interface{}{"scope": "contract-go", "key": g.run, "request": map[string]interface{}{"amount": 1}}
	first, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/idempotency/begin", Want: 200, Body: key})
	if err != nil {
		return err
	}
	if first["state"] != "started" {
		return g.behaviour("a new key: expected state started, got %v", first)
	}
	done := map[string]interface{}{"scope": "contract-go", "key": g.run, "request": map[string]interface{}{"amount": 1}, "response": map[string]interface{}{"order": 7}, "status_code": 201}
	if _, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/idempotency/complete", Want: 200, Body: done}); err != nil {
		return err
	}
	again, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/idempotency/begin", Want: 200, Body: key})
	if err != nil {
		return err
	}
	if again["state"] != "replay" || num(again["status_code"]) != 201 {
		return g.behaviour("the same key again: expected a replay of 201, got %v", again)
	}
	return nil
}

// manualRun: a round of canary now (202 once claimed), then its record until it has finished.
func (g *gateway) manualRun(ctx context.Context) error {
	r, err := g.do(ctx, Call{Method: "POST", Path: "/api/v1/jobs/canary/run", Want: 202})
	if err != nil {
		return err
	}
	runID := int64(num(r["run_id"]))
	path := fmt.Sprintf("/api/v1/jobs/canary/runs/%d", runID)
	if poll, _ := r["poll"].(string); poll != path {
		return g.behaviour("poll is %q, expected %q", poll, path)
	}
	return until(ctx, "the canary round to finish", func() (bool, error) {
		rec, err := g.do(ctx, Call{Method: "GET", Path: path, Want: 200})
		if err != nil {
			return false, err
		}
		run, _ := rec["run"].(map[string]interface{})
		switch status, _ := run["status"].(string); status {
		case "running":
			return false, nil
		case "ok":
			return true, nil
		default:
			return false, g.behaviour("the manual canary round ended %q", status)
		}
	})
}

// errorCases: the error model on the wire, for requests the document refuses too and ones only the server can judge.
func (g *gateway) errorCases(ctx context.Context) error {
	calls := []Call{
		// No token: the document's security refuses it as well.
		{Method: "GET", Path: "/api/v1/jobs", NoAuth: true, Want: 401, WantRequest: RequestInvalid},
		// The platform query parameter is required.
		{Method: "GET", Path: "/api/v1/scheduler/accounts", Want: 400, WantRequest: RequestInvalid},
		// A negative token count: refused whole, the field named.
		{Method: "POST", Path: "/api/v1/usage", Want: 400, WantRequest: RequestAny, Body: map[string]interface{}{"events": []map[string]interface{}{{
			"request_id": g.run + "-bad", "user_id": "u", "platform": "openai", "model": "m", "input_tokens": -1, "output_tokens": 0, "cost": "0",
		}}}},
		{Method: "POST", Path: "/api/v1/accounts/999999999/token", Want: 404},
		{Method: "POST", Path: "/api/v1/jobs/no_such_job/run", Want: 404, WantRequest: RequestAny},
	}
	for _, call := range calls {
		r, err := g.do(ctx, call)
		if err != nil {
			return err
		}
		e, _ := r["error"].(map[string]interface{})
		if code, _ := e["code"].(string); code == "" {
			return g.behaviour("an error answer without error.code: %s", redact(g.last.Body))
		}
		if fields, _ := e["fields"].([]interface{}); call.Want == 400 && len(fields) == 0 {
			return g.behaviour("a 400 must name the offending fields in error.fields: %s", redact(g.last.Body))
		}
	}
	return nil
}
