// The independent contract check (test/contract-go.test.ts). The test builds it in GOPATH mode
// (GO111MODULE=off, GOPATH=/usr/share/gocode) against Debian's packages, so no module download is
// needed: golang-go and golang-github-getkin-kin-openapi-dev (bookworm: Go 1.19, kin-openapi
// 0.110.0, the version required below). This file is for editors and module-mode builds elsewhere.
module github.com/relay-jobs/relay-jobs/test/contract-go

go 1.19

require github.com/getkin/kin-openapi v0.110.0
