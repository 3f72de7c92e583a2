//! `pglease queue grant` and `pglease queue revoke`: who may produce to and consume a queue
//! (`lease_queue.grant_queue`, `lease_queue.revoke_queue`; docs/QUEUE.md §9).

use std::process::ExitCode;

use serde::Serialize;

use crate::cli::QueueGrantArgs;
use crate::connect::Target;
use crate::exit::BoxError;
use crate::output;

/// Grants (`grant`) or revokes the privilege of `args`.
pub async fn grant(
    args: QueueGrantArgs,
    grant: bool,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let client = crate::queue::connect(target).await?;
    let (q, role, privilege) = (&args.queue.queue, &args.role, args.privilege.as_str());
    let sql = if grant {
        "SELECT lease_queue.grant_queue($1, $2, $3)"
    } else {
        "SELECT lease_queue.revoke_queue($1, $2, $3)"
    };
    target
        .answer(client.execute(sql, &[q, role, &privilege]))
        .await?;

    #[derive(Serialize)]
    struct Json<'a> {
        queue: &'a str,
        role: &'a str,
        privilege: &'a str,
        granted: bool,
    }
    if args.output.json {
        output::json(&Json {
            queue: q,
            role,
            privilege,
            granted: grant,
        })?;
    } else if grant {
        output::out(&format!("{role} may {privilege} queue {q}\n"))?;
    } else {
        output::out(&format!(
            "{role} may no longer {privilege} queue {q} (unless a role it is a member of may)\n"
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
