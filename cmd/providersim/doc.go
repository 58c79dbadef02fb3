// Command providersim serves the card provider simulator of package
// providersim over HTTP, for local runs and end-to-end tests.
//
// Usage:
//
//	providersim [-addr 127.0.0.1:4010] [-secret TOKEN] [-slow 2s]
//
// -secret defaults to $PROVIDER_SECRET. When non-empty, every charge,
// refund, capture, cancel and lookup must carry it as a bearer token. It logs one JSON line
// per request on stderr and shuts down gracefully on SIGINT or SIGTERM.
package main
