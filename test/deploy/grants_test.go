package deploy

import (
	"fmt"
	"go/types"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/vta"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// requests are the SDK values whose construction uses each action: a
// request's input, or a transaction's item, which IAM authorizes as its
// item action.
var requests = map[string][]reflect.Type{
	"dynamodb:GetItem":              {reflect.TypeFor[dynamodb.GetItemInput]()},
	"dynamodb:PutItem":              {reflect.TypeFor[dynamodb.PutItemInput](), reflect.TypeFor[ddbtypes.Put]()},
	"dynamodb:UpdateItem":           {reflect.TypeFor[dynamodb.UpdateItemInput](), reflect.TypeFor[ddbtypes.Update]()},
	"dynamodb:DeleteItem":           {reflect.TypeFor[dynamodb.DeleteItemInput](), reflect.TypeFor[ddbtypes.Delete]()},
	"dynamodb:ConditionCheckItem":   {reflect.TypeFor[ddbtypes.ConditionCheck]()},
	"dynamodb:Query":                {reflect.TypeFor[dynamodb.QueryInput]()},
	"dynamodb:Scan":                 {reflect.TypeFor[dynamodb.ScanInput]()},
	"sqs:SendMessage":               {reflect.TypeFor[sqs.SendMessageInput](), reflect.TypeFor[sqs.SendMessageBatchInput]()},
	"s3:PutObject":                  {reflect.TypeFor[s3.PutObjectInput]()},
	"secretsmanager:GetSecretValue": {reflect.TypeFor[secretsmanager.GetSecretValueInput]()},
	// Secrets Manager decrypts a secret with the caller's rights.
	"kms:Decrypt": {reflect.TypeFor[secretsmanager.GetSecretValueInput]()},
}

// owners are the types whose methods call AWS on each resource, by its
// logical id, or by the parameter that names it (a secret, the KMS key).
var owners = map[string]reflect.Type{
	idempotencyTable:          reflect.TypeFor[dynamostore.Store](),
	chargesTable:              reflect.TypeFor[charge.Rows](),
	"GlobalIdempotencyTable":  reflect.TypeFor[dynamostore.Store](),
	"GlobalChargesTable":      reflect.TypeFor[charge.Rows](),
	"RoutesTableName":         reflect.TypeFor[regions.Routes](),
	"LedgerTableName":         reflect.TypeFor[dynamostore.Ledger](),
	limitsTable:               reflect.TypeFor[limit.Table](),
	reconcileQueue:            reflect.TypeFor[queue.Sender](),
	intakeDLQ:                 reflect.TypeFor[intake.Queue](),
	auditBucket:               reflect.TypeFor[audit.Archive](),
	auditIndex:                reflect.TypeFor[audit.Index](),
	"ProviderSecretName":      reflect.TypeFor[secrets.Secret](),
	"StripeWebhookSecretName": reflect.TypeFor[secrets.Secret](),
	"SecretsKmsKeyArn":        reflect.TypeFor[secrets.Secret](),
}

// The actions Lambda itself takes with a function's role: writing its
// output to its log group, its traces (Tracing: Active), polling the
// queue of its SQS event source, reading the stream of its DynamoDB event
// source (listing streams takes no resource), and sending what that event
// source discards to its destination.
var (
	logActions     = []string{"logs:CreateLogStream", "logs:PutLogEvents"}
	tracingActions = []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
	pollActions    = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
	streamActions  = []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
	listStreams    = "dynamodb:ListStreams"
	discardAction  = "sqs:SendMessage"
)

// built is what each function's code constructs: by its CodeUri, by the
// owner (typeKey) whose method built it, the requests (typeKey) the code
// reached from its main builds. A request built in a package outside
// any owner's method is every owner's of that package, or the package's
// (its path) if it has none. Under optionsSet are the fields it writes.
type built map[string]map[string]map[string]bool

// guarded are the requests an owner builds only when the code sets an
// option: by owner and request, the option's field ("path.Type.Field").
// The Store scans for stuck leases only without an index to query.
var guarded = map[[2]string]string{
	{typeKey(reflect.TypeFor[dynamostore.Store]()), typeKey(reflect.TypeFor[dynamodb.ScanInput]())}: typeKey(reflect.TypeFor[dynamostore.Options]()) + ".ScanStuckLeases",
}

// optionsSet is where built holds the fields ("path.Type.Field") the code
// writes, which guarded names.
const optionsSet = "options set"

// requestTypes and ownerTypes are the types requests and owners name.
var (
	requestTypes = typeKeys(slices.Concat(slices.Collect(maps.Values(requests))...))
	ownerTypes   = typeKeys(slices.Collect(maps.Values(owners)))
)

func typeKeys(ts []reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, t := range ts {
		out[typeKey(t)] = true
	}
	return out
}

// ownersIn are the owners declared in package pkg, sorted.
func ownersIn(pkg string) []string {
	var out []string
	for k := range ownerTypes {
		if k[:strings.LastIndex(k, ".")] == pkg {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// roles checks that each function runs as a role of its own, which Lambda
// alone may assume, with inline policies only, and logs to a log group of
// its own, which keeps lines LogRetentionDays.
func (c *checker) roles() {
	params := asMap(c.tmpl["Parameters"])
	c.equal("LogRetentionDays Default", fmt.Sprint(asMap(params["LogRetentionDays"])["Default"]), "90")
	used := map[string]string{} // the roles and log groups seen, and whose
	for _, id := range c.functions() {
		fn := c.resource(id)
		p := c.props(id)
		if p["Policies"] != nil {
			c.fail("%s has Policies: SAM ignores them beside a Role", id)
		}
		role := c.roleOf(id)
		if r := asMap(asMap(c.tmpl["Resources"])[role]); r["Type"] != "AWS::IAM::Role" {
			c.fail("%s's Role is %s, want the Arn of an AWS::IAM::Role of its own", id, show(p["Role"]))
			continue
		}
		if other, ok := used[role]; ok {
			c.fail("%s and %s share the role %s", other, id, role)
		}
		used[role] = id
		rp := c.props(role)
		c.equal(role+" Condition", c.resource(role)["Condition"], fn["Condition"])
		c.equal(role+" AssumeRolePolicyDocument", rp["AssumeRolePolicyDocument"], map[string]any{
			"Version": "2012-10-17",
			"Statement": []any{map[string]any{
				"Effect": "Allow", "Principal": map[string]any{"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole",
			}},
		})
		for name := range rp {
			if name != "AssumeRolePolicyDocument" && name != "Policies" {
				c.fail("%s sets %s: the check reads inline policies only", role, name)
			}
		}
		group := fmt.Sprint(asMap(asMap(p["LoggingConfig"])["LogGroup"])["Ref"])
		if asMap(asMap(c.tmpl["Resources"])[group])["Type"] != "AWS::Logs::LogGroup" {
			c.fail("%s's LoggingConfig.LogGroup is %s, want a Ref to an AWS::Logs::LogGroup of its own", id, show(p["LoggingConfig"]))
			continue
		}
		if other, ok := used[group]; ok {
			c.fail("%s and %s share the log group %s", other, id, group)
		}
		used[group] = id
		c.equal(group+" Condition", c.resource(group)["Condition"], fn["Condition"])
		c.equal(group+" RetentionInDays", c.props(group)["RetentionInDays"], map[string]any{"Ref": "LogRetentionDays"})
	}
}

// functions are the template's functions' logical ids, sorted.
func (c *checker) functions() []string {
	var ids []string
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] == "AWS::Serverless::Function" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// roleOf is the logical id of the role function id's Role names, if it
// is a GetAtt.
func (c *checker) roleOf(id string) string {
	att := asList(asMap(c.props(id)["Role"])["Fn::GetAtt"])
	if len(att) != 2 || att[1] != "Arn" {
		return ""
	}
	return fmt.Sprint(att[0])
}

// statements are the statements of the inline policies of function id's
// role.
func (c *checker) statements(id string) []any {
	role := c.roleOf(id)
	if role == "" {
		return nil // roles says so
	}
	var out []any
	for _, pol := range asList(c.props(role)["Policies"]) {
		out = append(out, asList(asMap(asMap(pol)["PolicyDocument"])["Statement"])...)
	}
	return out
}

// grants checks that every action a function's role allows has a use on
// each of its resources. The function's code, reached from its main, builds
// a request that takes the action, for the owner of that resource. Or
// Lambda takes it for the function: on its log group, for its tracing, or
// polling the queue of its SQS event. Then it checks the other way (needs).
func (c *checker) grants(code built) {
	tracing := asMap(asMap(c.tmpl["Globals"])["Function"])["Tracing"] == "Active"
	for _, id := range c.functions() {
		p := c.props(id)
		dir := fmt.Sprint(p["CodeUri"])
		reached, ok := code[dir]
		if !ok {
			c.fail("%s's CodeUri %s is no main package of the module", id, dir)
			continue
		}
		// What its event sources read, by the Resource names resources
		// gives: queues, streams ("Table.StreamArn"), and the queues
		// streams' discarded changes go to.
		polled, streamed, discards := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, e := range asMap(p["Events"]) {
			ep := asMap(asMap(e)["Properties"])
			switch asMap(e)["Type"] {
			case "SQS":
				polled[fmt.Sprint(asList(asMap(ep["Queue"])["Fn::GetAtt"])[0])] = true
			case "DynamoDB":
				for _, s := range resources(ep["Stream"]) {
					streamed[s] = true
				}
				discards[fmt.Sprint(asList(asMap(asMap(asMap(ep["DestinationConfig"])["OnFailure"])["Destination"])["Fn::GetAtt"])[0])] = true
			}
		}
		group := fmt.Sprint(asMap(asMap(p["LoggingConfig"])["LogGroup"])["Ref"])
		granted := map[string]map[string]bool{} // by resource, the actions
		for _, st := range c.statements(id) {
			_, st := unwrapIf(st)
			s := asMap(st)
			if s["Effect"] != "Allow" || s["NotAction"] != nil || s["NotResource"] != nil {
				c.fail("%s's statement %s: want Effect Allow, Action and Resource", id, show(st))
				continue
			}
			for _, action := range strs(s["Action"]) {
				for _, res := range resources(s["Resource"]) {
					if granted[res] == nil {
						granted[res] = map[string]bool{}
					}
					granted[res][action] = true
					var used bool
					switch {
					case slices.Contains(logActions, action):
						used = res == group
					case slices.Contains(tracingActions, action):
						used = res == "*" && tracing
					case slices.Contains(pollActions, action):
						used = polled[res]
					case slices.Contains(streamActions, action):
						used = streamed[res]
					case action == listStreams:
						used = res == "*" && len(streamed) > 0
					case action == discardAction && discards[res]:
						used = true
					default:
						used = builds(reached, action, res)
					}
					if !used {
						c.fail("%s may %s on %s, and neither its code (%s) nor Lambda for it does", id, action, res, dir)
					}
				}
			}
		}
		c.needs(id, dir, reached, granted)
	}
}

// needs checks that function id's role, which grants what granted holds,
// allows each request its code (dir) builds. An owner's request needs its
// action on one of the owner's resources. It needs it on every one of them
// the role grants any action of that service on: a table of the stack's
// own and its global replacement, say. A guarded request needs its option
// set. A transaction needs only its items' actions.
func (c *checker) needs(id, dir string, reached map[string]map[string]bool, granted map[string]map[string]bool) {
	for _, owner := range slices.Sorted(maps.Keys(reached)) {
		if owner == optionsSet {
			continue
		}
		var mine []string // the owner's resources
		for res, t := range owners {
			if typeKey(t) == owner {
				mine = append(mine, res)
			}
		}
		slices.Sort(mine)
		for _, typ := range slices.Sorted(maps.Keys(reached[owner])) {
			if !requestTypes[typ] && typ != typeKey(reflect.TypeFor[dynamodb.TransactWriteItemsInput]()) {
				c.fail("%s's code (%s) builds %s, which the check ties to no action", id, dir, typ)
			}
		}
		for _, action := range slices.Sorted(maps.Keys(requests)) {
			if !takes(reached, owner, action) {
				continue
			}
			if mine == nil {
				c.fail("%s's code (%s) builds a request taking %s in %s, which calls AWS on no resource the check knows", id, dir, action, owner)
				continue
			}
			service, _, _ := strings.Cut(action, ":")
			var on []string // the owner's resources the role takes service's actions on
			for _, res := range mine {
				if slices.ContainsFunc(slices.Collect(maps.Keys(granted[res])), func(a string) bool { return strings.HasPrefix(a, service+":") }) {
					on = append(on, res)
				}
			}
			if on == nil {
				c.fail("%s's code (%s) builds a request taking %s for %s, and its role allows it on none of %s", id, dir, action, owner, strings.Join(mine, ", "))
			}
			for _, res := range on {
				if !granted[res][action] {
					c.fail("%s's code (%s) builds a request taking %s for %s, and its role does not allow it on %s", id, dir, action, owner, res)
				}
			}
		}
	}
}

// builds reports whether reached holds a request taking action, built for
// the owner of res.
func builds(reached map[string]map[string]bool, action, res string) bool {
	owner, ok := owners[res]
	return ok && takes(reached, typeKey(owner), action)
}

// takes reports whether reached holds a request taking action, built for
// owner, with its option set if guarded.
func takes(reached map[string]map[string]bool, owner, action string) bool {
	return slices.ContainsFunc(requests[action], func(t reflect.Type) bool {
		option, ok := guarded[[2]string{owner, typeKey(t)}]
		return reached[owner][typeKey(t)] && (!ok || reached[optionsSet][option])
	})
}

func typeKey(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

// without is b less what dir's code builds of typ for owner, or, with a
// nil owner, less dir.
func without(b built, dir string, owner, typ reflect.Type) built {
	out := maps.Clone(b)
	if owner == nil {
		delete(out, dir)
		return out
	}
	out[dir] = maps.Clone(out[dir])
	out[dir][typeKey(owner)] = maps.Clone(out[dir][typeKey(owner)])
	delete(out[dir][typeKey(owner)], typeKey(typ))
	return out
}

// with is b plus item (a request, or a field under optionsSet) under
// owner in what dir's code builds.
func with(b built, dir, owner, item string) built {
	out := maps.Clone(b)
	out[dir] = maps.Clone(out[dir])
	out[dir][owner] = maps.Clone(out[dir][owner])
	add(out[dir], owner, item)
	return out
}

// strs is a statement's Action, one or a list.
func strs(v any) []string {
	var out []string
	for _, a := range append(asList(v), v) {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// resources names what a statement's Resource (one or a list) is: a
// resource's logical id ("Table.StreamArn" for a table's stream), a
// parameter naming it ("GlobalTable.StreamArn" for its replica's stream),
// or "*". A Fn::If of two resources (a table of the stack's own, or one a
// parameter names) is both.
func resources(v any) []string {
	list := asList(v)
	if list == nil {
		list = []any{v}
	}
	var out []string
	for _, r := range list {
		_, r = unwrapIf(r)
		m := asMap(r)
		switch att := asList(m["Fn::GetAtt"]); {
		case len(asList(m["Fn::If"])) == 3:
			branches := asList(m["Fn::If"])
			out = append(out, resources(branches[1])...)
			out = append(out, resources(branches[2])...)
		case len(att) == 2 && att[1] == "StreamArn":
			out = append(out, fmt.Sprint(att[0], ".", att[1]))
		case m["Fn::GetAtt"] != nil:
			out = append(out, fmt.Sprint(att[0]))
		case m["Ref"] != nil:
			out = append(out, fmt.Sprint(m["Ref"]))
		case m["Fn::Sub"] != nil && strings.Contains(fmt.Sprint(m["Fn::Sub"]), "/stream/"):
			refs := subRefs(fmt.Sprint(m["Fn::Sub"]))
			out = append(out, refs[len(refs)-2]+".StreamArn") // the table's name, then the stream's label
		case m["Fn::Sub"] != nil:
			refs := subRefs(fmt.Sprint(m["Fn::Sub"]))
			out = append(out, strings.TrimSuffix(refs[len(refs)-1], ".Arn"))
		default:
			out = append(out, fmt.Sprint(r))
		}
	}
	return out
}

// queuePolicy checks that the charge-requests queue's policy denies
// sqs:SendMessage to every principal but the producers
// ChargeRequestProducers names (all of them when it names none), and
// allows nothing.
func (c *checker) queuePolicy() {
	var found []string
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] == "AWS::SQS::QueuePolicy" && slices.ContainsFunc(asList(c.props(id)["Queues"]), func(q any) bool {
			return reflect.DeepEqual(q, map[string]any{"Ref": intakeQueue})
		}) {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		c.fail("%d queue policies name %s, want 1", len(found), intakeQueue)
		return
	}
	noValue := map[string]any{"Ref": "AWS::NoValue"}
	c.equal(found[0]+" PolicyDocument", c.props(found[0])["PolicyDocument"], map[string]any{
		"Version": "2012-10-17",
		"Statement": []any{map[string]any{
			"Sid": "NamedProducersOnly", "Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage",
			"Resource": getAtt(intakeQueue, "Arn"),
			"Condition": map[string]any{"Fn::If": []any{"HasChargeRequestProducers",
				map[string]any{"ArnNotEquals": map[string]any{"aws:PrincipalArn": map[string]any{"Ref": "ChargeRequestProducers"}}}, noValue}},
		}},
	})
	c.equal("Conditions HasChargeRequestProducers", asMap(c.tmpl["Conditions"])["HasChargeRequestProducers"],
		map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{
			map[string]any{"Fn::Join": []any{"", map[string]any{"Ref": "ChargeRequestProducers"}}}, ""}}}})
	c.equal("ChargeRequestProducers Default", asMap(asMap(c.tmpl["Parameters"])["ChargeRequestProducers"])["Default"], "")
}

// reachedCode is built once: loading the module's code and its call graph
// takes a second or two.
var reachedCode = sync.OnceValues(reach)

const modulePath = "github.com/chargeonce/chargeonce"

// reach loads the module's packages that the functions (functions/*) build
// with, from source, and their other dependencies from export data. It
// builds their SSA form and one call graph (VTA) for all functions. It
// returns what each function's code, reached from its main, builds.
func reach() (built, error) {
	dir := testkit.RepoRoot()
	mains, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedImports | packages.NeedDeps, Dir: dir}, "./functions/...")
	if err != nil {
		return nil, fmt.Errorf("list the functions: %w", err)
	}
	var paths []string
	packages.Visit(mains, nil, func(p *packages.Package) {
		if strings.HasPrefix(p.PkgPath, modulePath+"/") {
			paths = append(paths, p.PkgPath)
		}
	})
	mode := packages.NeedName | packages.NeedImports | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo
	pkgs, err := packages.Load(&packages.Config{Mode: mode, Dir: dir}, paths...)
	if err != nil {
		return nil, fmt.Errorf("load the module: %w", err)
	}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			return nil, fmt.Errorf("load %s: %w", p.PkgPath, e)
		}
	}
	prog, ssaPkgs := ssautil.Packages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	g := vta.CallGraph(ssautil.AllFunctions(prog), nil)
	code := built{}
	for _, p := range ssaPkgs {
		if name, ok := strings.CutPrefix(p.Pkg.Path(), modulePath+"/"); ok && p.Pkg.Name() == "main" {
			code[name] = requestsFrom(g, p.Func("init"), p.Func("main"))
		}
	}
	return code, nil
}

// requestsFrom returns the requests that the code reached from roots
// builds, by owner. VTA's types flow from every caller of a function:
// the callbacks of a helper two functions share reach both. So it analyses
// again only the code reached, until that code no longer shrinks.
func requestsFrom(g *callgraph.Graph, roots ...*ssa.Function) map[string]map[string]bool {
	funcs, _ := reachFrom(g, roots)
	for {
		next, out := reachFrom(vta.CallGraph(funcs, nil), roots)
		if len(next) == len(funcs) {
			return out
		}
		funcs = next
	}
}

// visit is a function reached for an owner (owners): the owner whose
// method called it, while in the owner's package.
type visit struct {
	fn    *ssa.Function
	owner string
}

// reachFrom returns the functions that g reaches from roots, and the
// requests their code builds, by owner. It follows g's edges. Code loaded
// from export data has no body to follow. So a call into it, or of a
// function it returned, counts as calling what the call passes: a function,
// or the methods of a value of the module's. Lambda calls the handler main
// passes this way. So does another module's iterator call a loop's body.
func reachFrom(g *callgraph.Graph, roots []*ssa.Function) (map[*ssa.Function]bool, map[string]map[string]bool) {
	var queue []visit
	for _, fn := range roots {
		queue = append(queue, visit{fn, ""})
	}
	seen := map[visit]bool{}
	funcs := map[*ssa.Function]bool{}
	out := map[string]map[string]bool{}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if seen[v] {
			continue
		}
		seen[v] = true
		funcs[v.fn] = true
		v.owner = ownerIn(v.fn, v.owner)
		// The calls g knows a callee of, and those that may run code
		// without a body.
		known, opaque := map[ssa.CallInstruction]bool{}, map[ssa.CallInstruction]bool{}
		for _, e := range g.Nodes[v.fn].Out {
			queue = append(queue, visit{e.Callee.Func, v.owner})
			known[e.Site] = true
			opaque[e.Site] = opaque[e.Site] || e.Callee.Func.Blocks == nil
		}
		for _, b := range v.fn.Blocks {
			for _, instr := range b.Instrs {
				switch instr := instr.(type) {
				case ssa.CallInstruction:
					if _, builtin := instr.Common().Value.(*ssa.Builtin); !builtin && (opaque[instr] || !known[instr]) {
						for _, fn := range passed(v.fn.Prog, instr.Common().Args) {
							queue = append(queue, visit{fn, v.owner})
						}
					}
				case *ssa.Alloc:
					record(out, v, types.Unalias(instr.Type().(*types.Pointer).Elem()))
				case *ssa.Store:
					if f, ok := instr.Addr.(*ssa.FieldAddr); ok {
						if st, ok := types.Unalias(derefType(f.X.Type())).(*types.Named); ok && st.Obj().Pkg() != nil {
							add(out, optionsSet, namedKey(st)+"."+st.Underlying().(*types.Struct).Field(f.Field).Name())
						}
					}
				}
			}
		}
	}
	return funcs, out
}

// passed are the functions args pass: functions, closures, bound methods,
// and the methods of the module's values, as such or in interfaces.
func passed(prog *ssa.Program, args []ssa.Value) []*ssa.Function {
	var out []*ssa.Function
	for _, a := range args {
		switch a := a.(type) {
		case *ssa.Function:
			out = append(out, a)
		case *ssa.MakeClosure:
			out = append(out, a.Fn.(*ssa.Function))
		case *ssa.MakeInterface:
			out = append(out, passed(prog, []ssa.Value{a.X})...)
			if named, ok := types.Unalias(derefType(a.X.Type())).(*types.Named); ok && named.Obj().Pkg() != nil && strings.HasPrefix(named.Obj().Pkg().Path(), modulePath+"/") {
				ms := prog.MethodSets.MethodSet(a.X.Type())
				for sel := range ms.Methods() {
					out = append(out, prog.MethodValue(sel))
				}
			}
		}
	}
	return out
}

// record adds t, which v's function builds, to out if it is a request: a
// type requests names, or any AWS service's input. It goes under v's owner.
// Without one, it goes under every owner of the function's package, or the
// package when it has none.
func record(out map[string]map[string]bool, v visit, t types.Type) {
	named, ok := t.(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return
	}
	typ := namedKey(named)
	if !requestTypes[typ] && !(strings.HasPrefix(typ, "github.com/aws/aws-sdk-go-v2/service/") && strings.HasSuffix(typ, "Input")) {
		return
	}
	pkg := packageOf(v.fn)
	keys := []string{pkg}
	if v.owner != "" {
		keys = []string{v.owner}
	} else if o := ownersIn(pkg); len(o) > 0 {
		keys = o
	}
	for _, k := range keys {
		add(out, k, typ)
	}
}

func add(out map[string]map[string]bool, k, v string) {
	if out[k] == nil {
		out[k] = map[string]bool{}
	}
	out[k][v] = true
}

// packageOf is the path of the package that declares fn, or of the
// generic function or enclosing function it comes from.
func packageOf(fn *ssa.Function) string {
	for fn.Parent() != nil {
		fn = fn.Parent()
	}
	if fn.Origin() != nil {
		fn = fn.Origin()
	}
	if fn.Object() != nil && fn.Object().Pkg() != nil {
		return fn.Object().Pkg().Path()
	}
	if fn.Pkg != nil {
		return fn.Pkg.Pkg.Path()
	}
	return ""
}

func derefType(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// ownerIn is the owner fn runs for, called by code running for owner: its
// own if fn is an owner's method, or owner's while in owner's package.
func ownerIn(fn *ssa.Function, owner string) string {
	if o := ownerOf(fn); o != "" {
		return o
	}
	if owner != "" && owner[:strings.LastIndex(owner, ".")] == packageOf(fn) {
		return owner
	}
	return ""
}

// ownerOf is the owner ("path.Name") whose method fn is, or encloses it.
func ownerOf(fn *ssa.Function) string {
	for fn.Parent() != nil {
		fn = fn.Parent()
	}
	recv := fn.Signature.Recv()
	if recv == nil {
		return ""
	}
	named, ok := types.Unalias(derefType(recv.Type())).(*types.Named)
	if !ok || named.Obj().Pkg() == nil || !ownerTypes[namedKey(named)] {
		return ""
	}
	return namedKey(named)
}

// namedKey is typeKey for a type of the code loaded.
func namedKey(n *types.Named) string { return n.Obj().Pkg().Path() + "." + n.Obj().Name() }
