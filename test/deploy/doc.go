// Package deploy provides consistency checks of the deployment template
// (template.yaml) against the code: its tests assert that the tables, the
// TTL, the reconcile queues, the reconcile function's timeout and event
// source, and every function's environment are what the code defines and
// reads, so that neither side can change alone.
package deploy
