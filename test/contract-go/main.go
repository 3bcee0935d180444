// Command contract-go is an independent check of relay-jobs' OpenAPI document (issue 52): a gateway
// written in Go, with kin-openapi as the only reader of the contract. It loads the document from a
// live replica, validates it, and plays a gateway's hot path against the replica, validating every
// request and every answer with openapi3filter. It exits 0 when all held, 1 naming the operation
// and the violation, 2 when it could not run (flags, the service unreachable).
//
//	RELAY_JOBS_ADMIN_TOKEN=... contract-go -url http://127.0.0.1:8080 [-doc openapi.json]
//
// -doc reads the document from a file instead (the test feeds it a drifted copy to see it caught).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

func main() {
	base := flag.String("url", "", "the replica's base URL, e.g. http://127.0.0.1:8080")
	docFile := flag.String("doc", "", "read the OpenAPI document from this file instead of GET /api/v1/openapi.json")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()
	token := os.Getenv("RELAY_JOBS_ADMIN_TOKEN")
	if *base == "" || token == "" {
		fmt.Fprintln(os.Stderr, "contract-go: -url and the RELAY_JOBS_ADMIN_TOKEN variable are required")
		os.Exit(2)
	}
	// One line per violation: the JSON pointer and the reason, not the whole schema and value.
	openapi3.SchemaErrorDetailsDisabled = true
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	doc, err := LoadDocument(ctx, *base, *docFile)
	if err != nil {
		exit(err, nil)
	}
	c, err := NewContract(doc, *base, token)
	if err != nil {
		exit(&Violation{"getOpenApiDocument", "GET /api/v1/openapi.json", "document", err.Error()}, nil)
	}
	g := &gateway{c: c, run: fmt.Sprintf("cg%d", time.Now().UnixNano())}
	if err := g.play(ctx); err != nil {
		exit(err, c)
	}
	report(true, c, "")
}

func exit(err error, c *Contract) {
	if _, ok := err.(*Violation); !ok {
		fmt.Fprintln(os.Stderr, "contract-go:", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, err)
	report(false, c, err.Error())
	os.Exit(1)
}

// report prints one JSON line: whether every check held and the operations it called.
func report(ok bool, c *Contract, violation string) {
	ops := []string{}
	if c != nil {
		ops = c.Operations
	}
	line, _ := json.Marshal(map[string]interface{}{"ok": ok, "operations": ops, "violation": violation})
	fmt.Println(string(line))
}
