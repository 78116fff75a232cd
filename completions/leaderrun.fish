# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_leaderrun_global_optspecs
    string join \n lease= name= id= ttl= renew-every= retry-every= grace= request-timeout= stop-signal= once wait= hold-at-least= restart shell log-format= h/help V/version
end

function __fish_leaderrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_leaderrun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_leaderrun_using_subcommand
    set -l cmd (__fish_leaderrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c leaderrun -n "__fish_leaderrun_needs_command" -l lease -d 'Lease URL: file:///PATH, s3://BUCKET/KEY, gs://BUCKET/OBJECT or azblob://ACCOUNT/CONTAINER/BLOB' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l name -d 'Name of the local file lease used when --lease is absent' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l id -d 'Identity of this candidate, shown by `status` [default: HOSTNAME:PID]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l ttl -d 'How long a lease stays valid without renewal, e.g. 15s, 1m30s' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l renew-every -d 'How often the leader renews the lease [default: ttl/3]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l retry-every -d 'How often a waiting candidate polls the lease [default: min(2s, ttl/4)]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l grace -d 'Time between the stop signal and SIGKILL [default: min(5s, ttl/4)]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l request-timeout -d 'Longest time one store request may take [default: min(5s, ttl/5)]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l stop-signal -d 'Signal that asks the command to stop, e.g. TERM, SIGINT, 15 [default: SIGTERM]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l wait -d 'Give up campaigning after this long [default: 0 with --once, forever without]' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l hold-at-least -d 'Keep the lease at least this long after acquiring it, even if the command finishes sooner' -r
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l log-format -d 'Format of the one-line-per-transition log on stderr' -r -f -a "human\t'`leaderrun: elected (token 7) on file:///...`'
json\t'One JSON object per line'"
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l once -d 'Cron mode: try to acquire once, run the command once, release, exit'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l restart -d 'Start the command again whenever it exits while leader'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -l shell -d 'Run the command through `sh -c` (the words are joined with spaces)'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -s V -l version -d 'Print version'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -a "status" -d 'Show who holds a lease, its fencing token and its age'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -a "release" -d 'Hand a lease back so another candidate can take it at once'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -a "doctor" -d 'Check that a store really honours conditional writes'
complete -c leaderrun -n "__fish_leaderrun_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand status" -l lease -d 'Lease URL: file:///PATH, s3://BUCKET/KEY, gs://BUCKET/OBJECT or azblob://ACCOUNT/CONTAINER/BLOB' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand status" -l name -d 'Name of the local file lease used when --lease is absent' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand status" -l json -d 'Print one JSON object (or, when listing, one per line) instead of text'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand release" -l lease -d 'Lease URL: file:///PATH, s3://BUCKET/KEY, gs://BUCKET/OBJECT or azblob://ACCOUNT/CONTAINER/BLOB' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand release" -l name -d 'Name of the local file lease used when --lease is absent' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand release" -l log-format -d 'Format of the log on stderr' -r -f -a "human\t'`leaderrun: elected (token 7) on file:///...`'
json\t'One JSON object per line'"
complete -c leaderrun -n "__fish_leaderrun_using_subcommand release" -l force -d 'Mark the lease released at once, even while another holder has it'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand doctor" -l lease -d 'Lease URL: file:///PATH, s3://BUCKET/KEY, gs://BUCKET/OBJECT or azblob://ACCOUNT/CONTAINER/BLOB' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand doctor" -l name -d 'Name of the local file lease used when --lease is absent' -r
complete -c leaderrun -n "__fish_leaderrun_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand help; and not __fish_seen_subcommand_from status release doctor help" -f -a "status" -d 'Show who holds a lease, its fencing token and its age'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand help; and not __fish_seen_subcommand_from status release doctor help" -f -a "release" -d 'Hand a lease back so another candidate can take it at once'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand help; and not __fish_seen_subcommand_from status release doctor help" -f -a "doctor" -d 'Check that a store really honours conditional writes'
complete -c leaderrun -n "__fish_leaderrun_using_subcommand help; and not __fish_seen_subcommand_from status release doctor help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
