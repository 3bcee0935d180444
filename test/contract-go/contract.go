package main

// The validating client: every request is checked against the document by kin-openapi's
// openapi3filter.ValidateRequest before it is sent, and every answer by ValidateResponse (status
// included: an undocumented status is a violation) before the gateway looks at it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Violation is a failed check, named by the operation it happened in.
type Violation struct {
	Operation string // operationId, or METHOD path when the document has no operation for it
	Call      string // METHOD path
	Phase     string // document, route, request, response, status, behaviour
	Detail    string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("contract violation: operation %s (%s): %s: %s", v.Operation, v.Call, v.Phase, v.Detail)
}

// RequestExpectation says what the document must think of a request the gateway sends.
type RequestExpectation int

const (
	RequestValid   RequestExpectation = iota // the document accepts it (the default)
	RequestInvalid                           // a deliberately bad request: the document refuses it too
	RequestAny                               // bad in a way a schema cannot express (the server refuses it)
)

// Call is one request of the gateway.
type Call struct {
	Method      string
	Path        string // with the query string: /api/v1/scheduler/accounts?platform=openai
	Body        interface{}
	NoAuth      bool
	Want        int // the status the gateway expects
	WantRequest RequestExpectation
}

// Result is a validated answer.
type Result struct {
	Operation string
	Status    int
	Header    http.Header
	Body      []byte
}

// JSON decodes the answer's body into a map (every JSON answer of the API is an object).
func (r *Result) JSON() map[string]interface{} {
	out := map[string]interface{}{}
	_ = json.Unmarshal(r.Body, &out)
	return out
}

// Contract is a gateway's HTTP client bound to the service's OpenAPI document.
type Contract struct {
	doc    *openapi3.T
	router routers.Router
	base   string
	token  string
	client *http.Client
	// Operations is every operationId called, in order, with its status: printed at the end.
	Operations []string
}

// LoadDocument reads the document (from the service, or a file for the checker's own tests) and validates it.
func LoadDocument(ctx context.Context, base, file string) (*openapi3.T, error) {
	var data []byte
	if file != "" {
		b, err := readFile(file)
		if err != nil {
			return nil, err
		}
		data = b
	} else {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/openapi.json", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, &Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", err.Error()}
		}
		defer res.Body.Close()
		data, _ = io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return nil, &Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", fmt.Sprintf("status %d without authentication: %.200s", res.StatusCode, data)}
		}
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, &Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", "does not load: " + err.Error()}
	}
	if doc.OpenAPI != "3.0.3" {
		return nil, &Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", fmt.Sprintf("openapi is %q, expected 3.0.3", doc.OpenAPI)}
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, &Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", "is not valid OpenAPI 3.0: " + err.Error()}
	}
	allowNullWhereUntyped(doc) // nullable.go: OpenAPI 3.0.3's reading of an untyped schema
	return doc, nil
}

// NewContract binds the document to the live service: relative servers (or none) become the service's base URL.
func NewContract(doc *openapi3.T, base, token string) (*Contract, error) {
	servers := openapi3.Servers{}
	for _, s := range doc.Servers {
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, fmt.Errorf("server URL %q: %w", s.URL, err)
		}
		servers = append(servers, &openapi3.Server{URL: strings.TrimRight(base, "/") + strings.TrimRight(u.Path, "/")})
	}
	if len(servers) == 0 {
		servers = append(servers, &openapi3.Server{URL: strings.TrimRight(base, "/")})
	}
	doc.Servers = servers
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("routing the document: %w", err)
	}
	return &Contract{doc: doc, router: router, base: strings.TrimRight(base, "/"), token: token, client: &http.Client{Timeout: 60 * time.Second}}, nil
}

// authenticate checks that the request carries what a security scheme asks for (the server decides whether it is right).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	req := in.RequestValidationInput.Request
	s := in.SecurityScheme
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if h := req.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") && len(h) > len("Bearer ") {
			return nil
		}
		return fmt.Errorf("no bearer token for %s", in.SecuritySchemeName)
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := req.Cookie(s.Name); err == nil {
			return nil
		}
		return fmt.Errorf("no cookie %s", s.Name)
	case s.Type == "apiKey" && s.In == "header":
		if req.Header.Get(s.Name) != "" {
			return nil
		}
		return fmt.Errorf("no header %s", s.Name)
	}
	return fmt.Errorf("security scheme %s (%s) is not one a gateway sends", in.SecuritySchemeName, s.Type)
}

func (c *Contract) newRequest(ctx context.Context, call Call, body []byte) *http.Request {
	var reader io.Reader = http.NoBody
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, call.Method, c.base+call.Path, reader)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if !call.NoAuth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	return req
}

// Do validates the request, sends it, validates the answer and checks its status.
func (c *Contract) Do(ctx context.Context, call Call) (*Result, error) {
	where := call.Method + " " + call.Path
	var body []byte
	if call.Body != nil {
		b, err := json.Marshal(call.Body)
		if err != nil {
			return nil, err
		}
		body = b
	}
	// The validator may rewrite the request it checks (defaults): it gets a copy, the server the original.
	checked := c.newRequest(ctx, call, body)
	route, params, err := c.router.FindRoute(checked)
	if err != nil {
		return nil, &Violation{where, where, "route", "the document has no operation for it: " + err.Error()}
	}
	op := route.Operation.OperationID
	fail := func(phase, detail string) error { return &Violation{op, where, phase, detail} }
	input := &openapi3filter.RequestValidationInput{Request: checked, PathParams: params, Route: route, Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true}}
	reqErr := openapi3filter.ValidateRequest(ctx, input)
	switch {
	case call.WantRequest == RequestValid && reqErr != nil:
		return nil, fail("request", describe(reqErr))
	case call.WantRequest == RequestInvalid && reqErr == nil:
		return nil, fail("request", "the gateway sent a request the server must refuse, but the document accepts it")
	}

	res, err := c.client.Do(c.newRequest(ctx, call, body))
	if err != nil {
		return nil, fail("transport", err.Error())
	}
	data, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, fail("transport", err.Error())
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Body:                   io.NopCloser(bytes.NewReader(data)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return nil, fail("response", fmt.Sprintf("status %d: %s; body %.300s", res.StatusCode, describe(err), redact(data)))
	}
	if r := route.Operation.Responses.Get(res.StatusCode); r != nil && r.Value != nil && len(r.Value.Content) == 0 && len(data) > 0 {
		return nil, fail("response", fmt.Sprintf("status %d is documented without a body, but the answer has one: %.200s", res.StatusCode, redact(data)))
	}
	if call.Want != 0 && res.StatusCode != call.Want {
		return nil, fail("status", fmt.Sprintf("expected %d, got %d: %.300s", call.Want, res.StatusCode, redact(data)))
	}
	c.Operations = append(c.Operations, fmt.Sprintf("%s %d", op, res.StatusCode))
	return &Result{Operation: op, Status: res.StatusCode, Header: res.Header, Body: data}, nil
}

// describe flattens kin-openapi's errors into one line: each violation with its JSON pointer.
func describe(err error) string {
	if multi, ok := err.(openapi3.MultiError); ok && len(multi) > 0 {
		parts := make([]string, 0, len(multi))
		for _, e := range multi {
			parts = append(parts, describe(e))
		}
		return strings.Join(parts, "; ")
	}
	// A list of many items breaking one rule repeats it per item: the first few say what is wrong.
	parts := strings.Split(strings.ReplaceAll(err.Error(), "\n", " "), " | ")
	if len(parts) > 6 {
		parts = append(parts[:6], fmt.Sprintf("and %d more", len(parts)-6))
	}
	return strings.Join(parts, " | ")
}

// secretKey matches the fields whose values a violation message must not print (the access token answer).
var secretKey = regexp.MustCompile(`(?i)(^|_)(access_token|refresh_token|id_token|secret|password|api_key|credentials)$`)

// redact is an answer's body for a message: secret-looking fields replaced, whatever the nesting.
func redact(body []byte) string {
	var v interface{}
	if json.Unmarshal(body, &v) != nil {
		return string(body)
	}
	var walk func(interface{}) interface{}
	walk = func(x interface{}) interface{} {
		switch t := x.(type) {
		case map[string]interface{}:
			for k, val := range t {
				if secretKey.MatchString(k) {
					t[k] = "***"
				} else {
					t[k] = walk(val)
				}
			}
		case []interface{}:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return x
	}
	out, _ := json.Marshal(walk(v))
	return string(out)
}
