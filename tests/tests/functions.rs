//! Function libraries and SCRIPT LOAD scripts of a cluster instance (issue 17, item
//! 2): kept by the cluster manager and installed by every agent from the map. A library
//! and a script loaded through the only agent are callable through an agent started
//! later; a deletion (and a SCRIPT FLUSH) through the new agent reaches the first.

use dmc_e2e::{TestCluster, port_of, redis_cli, wait_until};

const LIB: &str = "#!lua name=late\nredis.register_function('hello', function(keys, args) return 'hi ' .. args[1] end)";

fn started(report: &serde_json::Value) -> Vec<String> {
    report["started"]
        .as_array()
        .expect("the started agents")
        .iter()
        .map(port_of)
        .collect()
}

#[test]
fn an_agent_that_joins_later_has_the_libraries_and_scripts_loaded_before() {
    let c = TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    let first = started(&c.scale(1).unwrap());
    assert_eq!(first.len(), 1);
    assert_eq!(redis_cli(&first[0], &["FUNCTION", "LOAD", LIB]), "late");
    let sha = redis_cli(
        &first[0],
        &["SCRIPT", "LOAD", "return 'loaded ' .. ARGV[1]"],
    );
    let second = started(&c.scale(2).unwrap());
    assert_eq!(second.len(), 1, "{second:?}");
    // No keys: FCALL runs on the agent it was sent to, which never saw the LOAD.
    wait_until("the new agent installs the library", || {
        redis_cli(&second[0], &["FCALL", "hello", "0", "there"]) == "hi there"
    });
    wait_until("the new agent installs the script", || {
        redis_cli(&second[0], &["EVALSHA", &sha, "0", "early"]) == "loaded early"
    });
    // A change through the new agent reaches the first one.
    assert_eq!(redis_cli(&second[0], &["FUNCTION", "DELETE", "late"]), "OK");
    wait_until("the first agent drops the library", || {
        redis_cli(&first[0], &["FCALL", "hello", "0", "x"]).contains("Function not found")
    });
    assert_eq!(redis_cli(&second[0], &["SCRIPT", "FLUSH"]), "OK");
    wait_until("the first agent drops the script", || {
        redis_cli(&first[0], &["SCRIPT", "EXISTS", &sha]) == "0"
    });
}
