// Package api is the coordinator's REST API (chi): POST /v1/transactions, GET
// /v1/transactions/{id}, GET /v1/transactions?state=…, with the OpenAPI 3.1 spec served at
// /openapi.yaml, and the web console at /ui/ (console.go: static pages embedded in the binary,
// a client of this API). Handlers return errors; errors.go maps each sentinel to one HTTP
// status.
package api
