"""The pages of the clusters Yardstick submits recipes to: /clusters (everyone reads; admins register one, or change
the one of that name, through launch.models.Cluster.register) and /clusters/<name> (its nodes as the cluster reports
them now, its jobs; admins forget it).

A cluster's headers are what an authenticating proxy in front of it wants: their values are secrets, so no page ever
shows one, not even the form that was just refused (its admin types them again); the pages show their names only.
"""

from django.contrib import messages
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from dashboard import launched
from launch import kind, remote
from launch.models import CLUSTER_KINDS, HEADER_NAME, Cluster, Launch
from launch.views import cluster_detail
from yardstick.auth import has_role, require_role
from yardstick.inputs import InputError

# The register form's one-line fields, as Cluster.register names them: (key, label, hint, placeholder, required).
# The headers textarea follows them; a refusal of a field that is none of these is shown above the form.
LINE_FIELDS = (
    ("name", "Name", "lower-case letters, digits, '.', '_' or '-': what a recipe's cluster field names", "", True),
    ("address", "Address", "Ray: its dashboard's http(s)://host:port, where the Jobs API answers (port 8265); Slurm: "
     "the path of the slurm.conf its commands read on this machine", "http://ray-head:8265", True),
    ("kind", "Kind", "the scheduler it runs", "", False),
    ("python", "Python", "what {python} is in its recipes: the interpreter on its nodes", "", False),
    ("description", "Description", "", "", False),
)
FORM_FIELDS = (*(f[0] for f in LINE_FIELDS), "headers")
JOBS_SHOWN = 50


def parse_headers(text):
    """{name: value} from the form's "Name: value" lines (blank lines skipped); InputError("headers") for a line with
    no name or a name given twice. The messages name the line, never its value: it is a secret."""
    headers = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if not colon or not name:
            raise InputError("headers", f"headers: line {number} is not 'Name: value' (one header a line, e.g. "
                                        "'Authorization: Bearer …')")
        if name in headers:
            raise InputError("headers", f"headers: {name!r} is given twice (lines of the same name)")
        headers[name] = value.strip()
    return headers


# -- /clusters ----------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def clusters_page(request):
    """GET: the registered clusters, for everyone; POST (admins): register one from the form."""
    if request.method == "POST":
        return _register(request)
    return _list(request)


@require_role("viewer")
def _list(request):
    return _list_page(request)


def _list_page(request, status=200, values=None, error=None, header_names=()):
    clusters = list(Cluster.objects.annotate(
        live_n=Count("launches", filter=Q(launches__job__status__in=kind.LIVE)), jobs_n=Count("launches")))
    for c in clusters:
        c.header_names = sorted(c.headers)  # what the page shows of them: never a value
    field = _form_field(error.field) if error else ""
    values = values or {"kind": CLUSTER_KINDS[0], "python": "python"}
    errors = {field: error.message} if error and field else {}
    fields = [{"key": key, "label": label, "hint": hint, "placeholder": placeholder, "required": required,
               "choices": CLUSTER_KINDS if key == "kind" else None, "wide": key == "description",
               "value": values.get(key, ""), "error": errors.get(key, "")}
              for key, label, hint, placeholder, required in LINE_FIELDS]
    return render(request, "dashboard/clusters.html", {
        "clusters": clusters, "can_edit": has_role(request.user, "admin"), "fields": fields, "errors": errors,
        "form_error": error if error and not field else None, "header_names": header_names,
    }, status=status)


def _form_field(field):
    """The form's field a refusal of `field` belongs beside ("headers.X-Token" is the headers textarea's); "" for
    none of them."""
    field = field.split(".", 1)[0]
    return field if field in FORM_FIELDS else ""


@require_POST
@require_role("admin")
def _register(request):
    values = {k: request.POST.get(k, "") for k in FORM_FIELDS if k != "headers"}
    text = request.POST.get("headers", "")
    headers = {}
    try:
        headers = parse_headers(text)
        cluster, outcome = Cluster.register({**{k: v.strip() for k, v in values.items()}, "headers": headers},
                                            request.user)
    except InputError as err:
        # The typed values stay, the headers' values do not: a page never holds a secret.
        return _list_page(request, status=400, values=values, error=err,
                          header_names=_names(headers, text))
    said = "registered" if outcome == "created" else "changed (the headers are the ones just given)"
    messages.success(request, f"Cluster {cluster.name} {said}.")
    return redirect("cluster", name=cluster.name)


def _names(headers, text):
    """The header names a refused form had, to say which to type again: the parsed ones, else the part before ':' of
    each line that is a header name (a line without one may be a pasted secret: never shown)."""
    names = list(headers) or [line.partition(":")[0].strip() for line in text.splitlines() if ":" in line]
    return sorted({n for n in names if HEADER_NAME.match(n)})


# -- /clusters/<name> ---------------------------------------------------------------------------------


@require_role("viewer")
def cluster_page(request, name):
    """One cluster: its fields, its nodes as it reports them now (asked while the page is drawn; each tied to the
    Yardstick node whose telemetry measures it, or flagged), and the jobs launched on it."""
    cluster = get_object_or_404(Cluster, name=name)
    detail = cluster_detail(cluster, nodes=True)
    jobs = Launch.objects.filter(cluster=cluster).select_related("job").order_by("-job_id")
    return render(request, "dashboard/cluster.html", {
        "cluster": cluster, "detail": detail, "nodes": detail["nodes"], "nodes_error": detail.get("nodes_error", ""),
        "unmeasured": sum(1 for n in detail["nodes"] if not n["measured"]),
        "launches": jobs[:JOBS_SHOWN], "jobs_n": jobs.count(), "jobs_shown": JOBS_SHOWN,
        "live": detail["live_jobs"], "can_edit": has_role(request.user, "admin"),
        "scheduler": launched.scheduler_name(cluster.kind),
    })


@require_POST
@require_role("admin")
def forget_cluster(request, name):
    """Forget a cluster (as DELETE /api/clusters/<name>, through launch.remote.forget): one that answers is refused
    while a job launched on it is live, since its follower needs the address; one that does not answer is forgotten
    with its live jobs, each ended saying its job may still run there. The ended jobs keep their history."""
    cluster = get_object_or_404(Cluster, name=name)
    forgotten, live, ended = remote.forget(cluster, by=request.user)
    if not forgotten:
        jobs = ", ".join(f"#{j}" for j in live)
        messages.error(request, f"Cluster {name} is not forgotten: it runs job{'s' if len(live) > 1 else ''} {jobs}, "
                                "which Yardstick follows there. Stop them first.")
        return redirect("cluster", name=name)
    said = f"Cluster {name} forgotten: its ended jobs keep their history."
    if ended:
        jobs = ", ".join(f"#{j}" for j in ended)
        said += (f" It did not answer, so its live job{'s' if len(ended) > 1 else ''} {jobs} ended here (failed, or "
                 "stopped if stopping; a queued one cancelled): they may still run on the cluster, and Yardstick no "
                 "longer follows them.")
    messages.success(request, said)
    return redirect("clusters")
