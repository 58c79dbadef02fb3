// Package gateway provides a local stand-in for API Gateway HTTP APIs in
// front of a Lambda handler: an http.Handler that turns each request into
// the payload 2.0 event the deployed API would send
// (events.APIGatewayV2HTTPRequest), invokes the handler in-process, and
// writes its events.APIGatewayV2HTTPResponse back.
//
// Like the deployed API it resolves the route key and path parameters from
// the configured routes (404 {"message":"Not Found"} otherwise), lower-cases
// header names, base64-encodes bodies that are not UTF-8 text, and puts a
// JWT authorizer context on the event. The JWT is replaced by a development
// token, "Authorization: Bearer dev:<tenant>", whose tenant becomes the
// configured claim; a request without one gets 401 {"message":"Unauthorized"}
// as the JWT authorizer would answer. A handler error, a panic, an invalid
// response or a handler that outlives the function timeout answers
// 500 {"message":"Internal Server Error"}, as a failed Lambda invocation does.
package gateway
