// Package deploy checks the deployment template (template.yaml) against the
// code, so that neither side can change alone. Its tests assert what the
// template declares. The tables and the TTL are what the code defines. So
// are the reconcile and charge-requests queues. So are the reconcile and
// intake functions' timeouts and event sources. Every function's
// environment is what the code reads.
//
// Every metric an alarm or the dashboard names is one the code emits
// (package metrics). It carries the dimensions the code emits it with.
// Every alarm notifies the alarm topic. The dashboard shows every metric and
// outcome the code emits.
//
// Each function runs as a role of its own. Every action the role allows is
// tied to its use (grants_test.go). The use is a request the code reached
// from the function's main builds, in a method of the type that calls AWS
// on that resource. Or it is what Lambda does for the function. The other
// way, the role allows every request that code builds. A call graph (VTA)
// over the module's code finds what main reaches.
package deploy
