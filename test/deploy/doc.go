// Package deploy provides consistency checks of the deployment template
// (template.yaml) against the code: its tests assert that the tables, the
// TTL, the reconcile and charge-requests queues, the reconcile and intake
// functions' timeouts and event sources, and every function's environment are what the code defines and
// reads, and that every metric an alarm or the dashboard names is one the
// code emits (package metrics) under the dimensions it emits it with, every
// alarm notifies the alarm topic, and the dashboard shows every metric and
// outcome the code emits, so that neither side can change alone. Each
// function runs as a role of its own, and every action the role allows is
// tied to its use: a request the code reached from the function's main
// builds, in the package that calls AWS on that resource, or what Lambda
// does for the function (grants_test.go).
package deploy
